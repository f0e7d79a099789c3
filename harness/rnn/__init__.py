"""Recurrent layers (issue 40): the problem family and its float64 oracle."""
