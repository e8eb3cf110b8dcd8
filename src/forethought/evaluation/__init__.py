"""Offline evaluations of forethought's parts on real workloads (e.g. next-call prediction accuracy)."""
