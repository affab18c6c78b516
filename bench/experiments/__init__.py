"""Benchmarks that each answered one question (a design choice measured against its alternative); kept to rerun."""
