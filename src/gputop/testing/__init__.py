"""Test doubles for the vendor libraries, driven by recorded data. Used by tests and benchmarks."""
