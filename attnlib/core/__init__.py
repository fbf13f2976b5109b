"""The model and what runs it: loading, the family descriptions, the runner, replay, block-wise attention, corpora."""
