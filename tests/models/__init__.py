"""The ONNX corpus: small exported models of today's families, and the tables the tests read."""
