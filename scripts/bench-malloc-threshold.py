"""What glibc's allocator settings cost the default target: prefill and one-token passes in this process.

    for env in "" MALLOC_MMAP_THRESHOLD_=131072; do env $env python scripts/bench-malloc-threshold.py; done

Run each setting in its own process (glibc reads the variable at start); compare the lines side by side.
"""
import os, time, torch
from engine import Engine, load_pair
from engine import torch_thread
from engine.kvcache import cache_for
pair = load_pair("default", with_draft=False)
e = Engine(pair)
text = open("engine/speculative.py").read()
ids = e.encode_fim(text[:3000], text[3000:4200])
print("prompt tokens", len(ids))
pre, dec = [], []


@torch.inference_mode()
def passes():  # on the torch thread, as the engine runs them: a second OpenMP pool slows every kernel call
    for rep in range(3):
        c = cache_for(pair.target)
        t = time.perf_counter(); c.extend_to(ids[:-1]); pre.append(time.perf_counter() - t)
        t = time.perf_counter()
        tok = ids[-1]
        for _ in range(16):
            tok = int(c.forward([tok], logits="last")[-1].argmax())
        dec.append((time.perf_counter() - t) / 16)


torch_thread.run(passes)
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
print(f"MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_')}: prefill s {[round(x,2) for x in pre]} decode ms/token {[round(x*1000,1) for x in dec]} rss MB {rss}")
