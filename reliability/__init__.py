"""The reliability and security suite: fault injection, load and audit accounting, with figures.

``python -m reliability`` runs the fault matrix against a real OPA process under concurrent
load and sustained load through the HTTP service, then writes JSON and RELIABILITY.md. The
pytest suite in ``tests/reliability`` runs a reduced matrix with the same code, plus fuzzing
and the isolation and security properties.
"""
