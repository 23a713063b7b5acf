"""Scale-out harness: replicas on network namespaces (python -m scaleout, SCALEOUT.md)."""
