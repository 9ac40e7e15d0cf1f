"""What ``minispark serve`` listens on and the limits every request is checked against: the defaults of
``ServeLimits``, ``ServeConfig`` and the ``serve`` flags, free of heavy imports so ``--help`` shows them.

    python -c "from minispark.server.limits import SERVE_QUEUE; print(SERVE_QUEUE)"
"""

#: `minispark serve`: loopback unless told otherwise; the limits every request is checked against (each
#: refused with an OpenAI-style JSON error: 413 body/pixels, 400 messages/max_tokens, 429 queue, 503 draining).
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 8000
SERVE_MAX_BODY_BYTES = 16 * 1024 * 1024  # a few base64 images
SERVE_BODY_TIMEOUT_S = 30.0  # a body shorter than its Content-Length held a handler open for ever
SERVE_MAX_MESSAGES = 128
SERVE_MAX_IMAGES = 8
#: Pixels per image a request may send (413 past it); under it the target downscales each image to its own
#: 6 GB-card budget (``image_max_pixels``) before the vision tower sees it.
SERVE_MAX_IMAGE_PIXELS = 4_000_000
SERVE_MAX_TOKENS = 2048  # the most max_tokens a request may ask for
SERVE_DEFAULT_MAX_TOKENS = 256  # when it asks for none
SERVE_QUEUE = 32  # requests waiting for a slot before 429
#: --max-concurrent at most: every slot holds a KV cache of its context (a 3B Qwen-VL target, 4k tokens: ~150 MB
#: each in bf16), and one verify forward pads them all; past this no single card holds them.
SERVE_MAX_SLOTS = 256
SERVE_DRAIN_S = 60.0  # Ctrl-C: how long in-flight requests get to finish
#: Cores the thread governor leaves to the server's event loop (HTTP, JSON, detokenizing) on a CPU: on 2 cores,
#: torch at 2 threads beside it served 4 clients at 19-24 tok/s, at 1 thread 29-35 (8 clients: 34-40 / 41-45;
#: ``benchmarks/peer_vllm.py --serve-clients``). A fixed ``--threads`` wins.
SERVE_RESERVED_CORES = 1


def serve_slots(device_type: str) -> int:
    """Requests in flight at once by default: a GPU verifies many rows for the price of one, a CPU
    (2 cores here) is compute-bound past a few."""
    return 8 if device_type == "cuda" else 4
