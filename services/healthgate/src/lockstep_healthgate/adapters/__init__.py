"""PostgreSQL and other I/O behind the healthgate's store."""
