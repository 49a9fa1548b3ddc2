"""The local learning coefficient: how it moves while a model learns, and what it is at a
checkpoint.

``llc_dynamics``: the LLC along training of deep linear networks, against its closed form at each
plateau. ``pretrained_llc``: the LLC and susceptibilities of a Hugging Face checkpoint, whole and
per component.
"""
