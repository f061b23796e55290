"""Scheduler emulation (Slurm partitions / Kubernetes node pools): jobs, drains, resumes."""
