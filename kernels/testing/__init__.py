"""Families that exist only to test the farm itself; registered when imported, never by default."""
