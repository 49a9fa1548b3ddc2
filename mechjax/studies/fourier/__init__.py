"""Fourier phase: does a network learn a signal's amplitudes before its phases, and how fast?

``fourier_phase``: the amplitude and phase tasks on translation-invariant inputs, with flat and
power-law spectra, and the steps each needs against the input size.
"""
