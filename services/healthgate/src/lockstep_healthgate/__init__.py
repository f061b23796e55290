"""Lockstep healthgate:

compares updated nodes with a control group and gates each wave."""
