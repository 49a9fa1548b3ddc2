"""Polymorphism as rotation: are independently trained models the same up to a rotation?

``polymorphism``: Dyck-3 transformers trained here, aligned by orthogonal Procrustes at every
residual site, with Haar tests and SAE and steering transfer (its measurements in
``polymorphism_analysis``, its table and figures in ``polymorphism_report``).
``pretrained_polymorphism``: the same question for two Hugging Face checkpoints.
"""
