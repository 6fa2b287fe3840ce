"""The benchmark's recorded results (``bench/results``)."""
