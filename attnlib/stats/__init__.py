"""The statistics as plain functions of arrays (`[layers, heads, n, n]` maps, vectors) and their mergeable sums."""
