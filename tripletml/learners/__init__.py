"""Similarity and metric learners."""
