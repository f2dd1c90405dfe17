"""codecue-bench: CodeCue's benchmarks, kept outside both `engine` and `codecue_lsp` so the layering holds.

`engine/` knows tokens and tensors and never imports the server; the benchmarks need both (the engine's modes, the
real server, the real prompt builder) and llama.cpp as the peer, so they live here, on top of both.
"""
