"""Patterning: can a re-weighting of the data, read off susceptibilities, steer what a model learns?

``patterning_parens``: which of two algorithms balanced-parenthesis models learn, and whether a
re-weighting moves it, with its LLC analysis in ``patterning_parens_llc``.
``patterning_parens_probe``: the earlier design of the same question, a probe loss targeted at one
posterior. ``patterning_parens_base``: what the parenthesis studies share.
``patterning_induction``: per-head susceptibilities of a small induction model, inverted into a
re-weighting.
"""
