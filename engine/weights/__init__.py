"""Weight formats and the kernels that run a model's passes: quantized layers, GGUF, vnni, llama.cpp, lean steps."""
