"""See spec.py."""
