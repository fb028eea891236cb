"""Language and speech models exported from Hugging Face ``transformers`` as a user exports
them, imported, built with default schedules and compared with onnxruntime.

    python -m benchmarks.model_corpus                       # full size, all four below
    python -m benchmarks.model_corpus --models bert_base    # one of them
    python -m benchmarks.model_corpus --small --write tests/models/transformers
                                                            # the small committed versions

Each model is built from its ``transformers`` configuration with random weights (seeded; nothing
is downloaded), batch 1, a fixed length, and exported with ``torch.onnx.export`` (torch's
default exporter, opset 18, weights in an external data file) by
``autotune.frontends.pytorch.export_onnx``:

``bert_base``      BertModel (12 layers, 768 wide, vocabulary 30522): token ids and an
                   attention mask of 128 tokens, whose last 16 are padding; embeddings and
                   pooler included.
``gpt2``           GPT2Model (12 layers, 768 wide): 128 token ids, the causal mask.
``gpt2_decode``    the same GPT2Model's decode step: one new token after 127 cached ones, the
                   cache as 24 inputs (each layer's keys and values, 1x12x127x64) and its
                   update as 24 outputs beside the hidden state, as a generation loop runs it.
``wav2vec2_base``  Wav2Vec2Model (its 1-D convolution front end and 12 layers): one second of
                   16 kHz audio.

and torchvision's models (``torchvision.models.get_model(name, weights=None)``, random
weights; a parameter torchvision starts at zero, such as ViT's head, drawn at random too, so
that the output depends on every layer), batch 1: the classifiers at 224x224
(``vit_b_16``, ``swin_t``, ``convnext_tiny``,
``maxvit_t``, ...: any name torchvision knows), ``r3d_18`` (video, 16 frames of 112x112) and
``lraspp_mobilenet_v3_large`` (segmentation, 224x224; its main output).  torchvision is
needed for those (``pip install torch==2.14.1 torchvision==0.29.1`` here).

Per model: the import time, the default build time, and the largest difference from
onnxruntime on the same inputs relative to the output's scale (``max |ours - ort| / max
|ort|``, the largest over the model's outputs, to be at most 1e-4), or the typed error that
stopped it.  ``--small`` builds narrow,
two-layer versions of the same architectures (the same operators), quick enough for the test
suite; ``--write DIR`` keeps their ONNX files (weights inside) and inputs there
(``NAME_small.onnx``, ``NAME_small_inputs.npz`` for the small ones).  Needs torch,
onnxscript and transformers (``pip install "autotune[torch]" transformers``).  Prints JSON.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time

import numpy as np

SEQ = 128
PADDING = 16
AUDIO = 16000


def _configs(small: bool) -> dict:
    import transformers as tf

    narrow = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64) if small else {}
    return {
        "bert_base": (tf.BertConfig(**narrow, **({"vocab_size": 512} if small else {})),
                      tf.BertModel),
        "gpt2": (tf.GPT2Config(**({"n_embd": 32, "n_layer": 2, "n_head": 2,
                                    "vocab_size": 512, "n_positions": SEQ} if small else {})),
                 tf.GPT2Model),
        "gpt2_decode": (tf.GPT2Config(**({"n_embd": 32, "n_layer": 2, "n_head": 2,
                                           "vocab_size": 512, "n_positions": SEQ}
                                          if small else {})), tf.GPT2Model),
        "wav2vec2_base": (tf.Wav2Vec2Config(**narrow, **(
            {"conv_dim": (32,) * 7, "num_conv_pos_embeddings": 16,
             "num_conv_pos_embedding_groups": 2} if small else {})), tf.Wav2Vec2Model),
    }


def _inputs(name: str, config, rng) -> dict:
    if name == "wav2vec2_base":
        return {"input_values": rng.standard_normal((1, AUDIO)).astype(np.float32)}
    if name == "gpt2_decode":
        heads, width = config.n_head, config.n_embd // config.n_head
        feed = {"input_ids": rng.integers(0, config.vocab_size, (1, 1)).astype(np.int64),
                "attention_mask": np.ones((1, SEQ), np.int64)}
        for layer in range(config.n_layer):
            for part in ("key", "value"):
                feed[f"past_{part}_{layer}"] = rng.standard_normal(
                    (1, heads, SEQ - 1, width)).astype(np.float32)
        return feed
    ids = rng.integers(0, config.vocab_size, (1, SEQ)).astype(np.int64)
    if name == "gpt2":
        return {"input_ids": ids}
    mask = np.ones((1, SEQ), np.int64)
    mask[0, SEQ - PADDING:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _main_output(module, pick):
    """``module`` returning ``pick(its output)`` alone: a tensor, not a model-output dataclass
    (transformers) or a dict (torchvision's segmentation models)."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            return pick(self.inner, args)

    return Wrapped()


def _first(inner, args):
    return inner(*args, return_dict=False)[0]


def _decode_step(inner, args):
    # The cache travels as plain tensors (what a generation loop outside torch holds): rebuilt
    # into transformers' cache object here, its update flattened back the same way.
    from transformers import DynamicCache

    input_ids, mask, *past = args
    cache = DynamicCache(config=inner.config)
    for layer in range(len(past) // 2):
        cache.update(past[2 * layer], past[2 * layer + 1], layer)
    out = inner(input_ids=input_ids, attention_mask=mask, past_key_values=cache,
                use_cache=True, return_dict=True)
    present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
    return (out.last_hidden_state, *present)


def _out(inner, args):
    y = inner(*args)
    return y["out"] if isinstance(y, dict) else y


# torchvision models whose input is not one 224x224 image.
VISION_INPUTS = {"r3d_18": (1, 3, 16, 112, 112), "mc3_18": (1, 3, 16, 112, 112),
                 "r2plus1d_18": (1, 3, 16, 112, 112), "inception_v3": (1, 3, 299, 299)}


def export(name: str, small: bool, folder: str) -> tuple[str, dict]:
    """(ONNX path, inputs) of model ``name`` exported into ``folder``."""
    import torch

    from autotune.frontends.pytorch import export_onnx

    configs = _configs(small)
    torch.manual_seed(0)
    if name not in configs:
        import torchvision

        builder = torchvision.models.get_model_builder(name)
        options = {"weights": None}
        if "weights_backbone" in inspect.signature(builder).parameters:
            options["weights_backbone"] = None   # a segmentation model: nothing downloaded
        module = builder(**options).eval()
        with torch.no_grad():
            # Some heads start at zero (ViT's): the output would be zero whatever the
            # importer did, and the comparison with onnxruntime would prove nothing.
            for param in module.parameters():
                if not param.any():
                    param.normal_(0.0, 0.02)
        module = _main_output(module, _out)
        shape = VISION_INPUTS.get(name, (1, 3, 224, 224))
        feed = {"input": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        path = export_onnx(module, (torch.from_numpy(feed["input"]),),
                           os.path.join(folder, f"{name}.onnx"), input_names=["input"],
                           output_names=["output"])
        return path, feed
    config, cls = configs[name]
    module = cls(config).eval()
    feed = _inputs(name, config, np.random.default_rng(0))
    args = tuple(torch.from_numpy(v) for v in feed.values())
    outputs = ["output"]
    if name == "gpt2_decode":
        outputs += [k.replace("past", "present") for k in feed if k.startswith("past_")]
    path = export_onnx(_main_output(module, _decode_step if name == "gpt2_decode" else _first),
                       args, os.path.join(folder, f"{name}.onnx"), input_names=list(feed),
                       output_names=outputs)
    return path, feed


def check(path: str, feed: dict, threads: int = 2) -> dict:
    """Import, build and compare ``path`` with onnxruntime (see the module text)."""
    import onnxruntime as ort

    import autotune

    out: dict = {}
    try:
        start = time.perf_counter()
        model = autotune.load_model(path)
        out["import_s"] = round(time.perf_counter() - start, 2)
        out["nodes"] = len(model.nodes)
        start = time.perf_counter()
        lib = autotune.build(model, f"llvm -num-cores {threads}")
        out["build_s"] = round(time.perf_counter() - start, 2)
        ours = lib.run(feed)
    except Exception as err:  # noqa: BLE001 - reported per model
        out["error"] = f"{type(err).__name__}: {err}"[:600]
        return out
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out["outputs"] = len(names)
    worst, shapes_agree = 0.0, True
    for name, ref in zip(names, sess.run(None, feed)):
        got = ours[name]
        shapes_agree &= got.shape == ref.shape
        scale = float(np.max(np.abs(ref))) or 1.0
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref)) / scale))
    out["max_rel_diff"] = worst
    out["matches"] = bool(shapes_agree and worst <= 1e-4)
    return out


def tune(path: str, trials: int, threads: int, database: str) -> dict:
    """How ``tune_model`` on ``path`` with ``trials`` ends: trials run, wall time, coverage
    of the built model, or the error."""
    import autotune

    start = time.perf_counter()
    try:
        result = autotune.tune_model(path, f"llvm -num-cores {threads}", trials=trials,
                                     database=database, log=False)
    except Exception as err:  # noqa: BLE001 - reported per model
        return {"error": f"{type(err).__name__}: {err}"[:600]}
    return {"trials": trials, "trials_run": result.trials_run,
            "wall_s": round(time.perf_counter() - start, 1),
            "coverage": None if result.coverage is None else round(result.coverage, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_corpus",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_base,gpt2,gpt2_decode,wav2vec2_base")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--write", help="keep the exported ONNX files and inputs here")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="then tune each model that matched with this many trials (a "
                             "fresh database) and report how the run ended")
    args = parser.parse_args(argv)
    import onnx
    import torch
    try:
        import transformers
    except ImportError:
        transformers = None

    results = {}
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            row: dict = {}
            try:
                start = time.perf_counter()
                path, feed = export(name, args.small, tmp)
                row["export_s"] = round(time.perf_counter() - start, 2)
            except Exception as err:  # noqa: BLE001 - reported per model
                results[name] = {"error": f"export: {type(err).__name__}: {err}"[:600]}
                continue
            proto = onnx.load(path)
            row["opset"] = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
            row["weights_mb"] = round(sum(np.prod(t.dims) * 4 for t in proto.graph.initializer)
                                      / 2**20, 1)
            row.update(check(path, feed, args.threads))
            if args.tune_trials and row.get("matches"):
                row["tune"] = tune(path, args.tune_trials, args.threads,
                                   os.path.join(tmp, "tuning.db"))
            if args.write:
                os.makedirs(args.write, exist_ok=True)
                stem = f"{name}_small" if args.small else name
                onnx.save(proto, os.path.join(args.write, f"{stem}.onnx"))
                np.savez(os.path.join(args.write, f"{stem}_inputs.npz"), **feed)
            results[name] = row
    print(json.dumps({"benchmark": "model_corpus", "small": args.small,
                      "torch": torch.__version__,
                      "transformers": getattr(transformers, "__version__", None),
                      "onnx": onnx.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
