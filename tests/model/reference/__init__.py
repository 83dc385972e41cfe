"""Independent references for kvevict's model support: a GGUF reader/writer
with numpy dequantizers (gguf_io), a safetensors reader (safetensors_io) and a
Llama-family forward pass in torch (forward).

Written from the format and architecture definitions (the GGUF spec, ggml's
block layouts, the safetensors README, the HF Llama/Qwen2 definitions; see
/work/shared/notes/model-files.md), never from kvevict's C++, so that the two
can be compared."""
