"""Tensor similarity: does weight-space similarity of bilinear networks track what they compute?

``tensor_similarity_grokking``: similarity between checkpoints and seeds through grokking of
modular addition. ``tensor_similarity_backdoor``: whether it tells a backdoored network from a
clean one that the output metrics call the same.
"""
