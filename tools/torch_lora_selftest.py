#!/usr/bin/python3
"""Self-test of tools/torch_lora.py and tools/torch_peft_check.py on tiny random models, so the
LoRA reference can be trusted before Strata's side exists. Run by tests/torch_lora_selftest.sh.

For GPT-2 and a GQA Llama with an untied head it checks:
 1. with lora_B = 0 the LoRA model's logits equal the base model's bit for bit, and with random
    adapters they equal (to rounding) a plain model whose weights are W + (alpha/r) B A, merged
    here in float64 (so the scale alpha/r and the orientation of A and B are checked);
 2. torch_lora.py's adapter gradients against central finite differences of that merged model
    in float64 (an independent path: no LoRALinear);
 3. a LoRA on q_proj alone changes only the q rows of the fused q|k|v output;
 4. torch_peft_check.py passes on a base/adapter/merged set written here (PEFT names; GPT-2
    with `transformer.`, Llama sharded) and fails (exit 1) when one merged weight is off by 1e-3,
    when lora_alpha or r in adapter_config.json is wrong, or when the adapter changes nothing;
    modules_to_save (a fully trained ln_f) is applied, and refused when not declared;
plus training (torch_lora.py's AdamW steps, in float64 and in its f32 fixture, against an
AdamW with global-norm clipping written out here; the base's bits unchanged) and refused
inputs.
Prints one line per check; exits 1 at the first failure.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import torch_export_check as tec  # noqa: E402
import torch_gpt2 as tg  # noqa: E402
import torch_lora as tlo  # noqa: E402
import torch_parity as tp  # noqa: E402
import torch_peft_check as tpc  # noqa: E402

RANK, ALPHA = 2, 6.0
STEPS, BATCH, SEQ = 3, 2, 6


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"ok   {what}")


def metadata(arch):
    meta = {"arch": arch, "n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 13,
            "context_length": 8, "B": BATCH, "T": SEQ, "steps": STEPS, "warmup_steps": 1,
            "lr": 0.05, "min_lr_ratio": 0.1, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
            "eps": 1e-8, "grad_clip": 0.5, "lora_rank": RANK, "lora_alpha": ALPHA}
    if arch == "llama":  # GQA (4 query heads over 2 key/value heads), untied head, llama3 RoPE
        meta.update({"n_head": 4, "n_kv_head": 2, "ffn_hidden": 12, "rope_theta": 10000.0,
                     "norm_eps": 1e-5, "tie_embeddings": "0", "rope_scaling": "llama3",
                     "rope_factor": 4.0, "rope_low_freq_factor": 1.0,
                     "rope_high_freq_factor": 4.0, "rope_original_context_length": 4})
    return {k: str(v) for k, v in meta.items()}


def model_parts(meta):
    """(cfg, torch_parity Arch, parameter table) of a metadata dict."""
    cfg, arch = tp.model_config(meta, tlo.parse_numbers(meta, tlo.INT_KEYS, tlo.FLOAT_KEYS))
    return cfg, arch, arch.param_shapes(cfg)


def random_base(meta, gen):
    _, _, shapes = model_parts(meta)
    # norm weights around 1, everything else small: a well-conditioned, non-trivial model
    return {name: (1.0 if len(shape) == 1 and name.endswith("weight") else 0.0)
            + 0.3 * torch.randn(shape, generator=gen) for name, shape in shapes}


def random_adapters(meta, params, modules, gen, zero_b=False):
    """{(layer, module): (A, B)} for `modules` of every layer, shaped from the base weights."""
    cfg, _, _ = model_parts(meta)
    adapters = {}
    for layer in range(cfg.n_layer):
        for module in modules:
            out_f, in_f = params[f"blk.{layer}.{tlo.MODULES[meta['arch']][module]}.weight"].shape
            A = 0.4 * torch.randn(RANK, in_f, generator=gen)
            B = torch.zeros(out_f, RANK) if zero_b else 0.4 * torch.randn(out_f, RANK,
                                                                           generator=gen)
            adapters[(layer, module)] = (A, B)
    return adapters


def fixture_tensors(params, adapters, tokens):
    out = dict(params)
    out["tokens"] = tokens
    for (layer, module), (A, B) in adapters.items():
        out[f"blk.{layer}.{module}.lora_A"] = A
        out[f"blk.{layer}.{module}.lora_B"] = B
    return out


def plain_model(meta, params, dtype=torch.float32):
    cfg, arch, _ = model_parts(meta)
    model = arch.make(cfg).to(dtype)
    arch.load_params(model, {n: t.to(dtype) for n, t in params.items()})
    return model


def merged_params(meta, params, adapters, dtype=torch.float64):
    """W + (alpha/r) B A for every adapted weight, in `dtype` (Strata's (out, in) layout)."""
    merged = {n: t.to(dtype) for n, t in params.items()}
    for (layer, module), (A, B) in adapters.items():
        name = f"blk.{layer}.{tlo.MODULES[meta['arch']][module]}.weight"
        merged[name] = merged[name] + (ALPHA / RANK) * (B.to(dtype) @ A.to(dtype))
    return merged


def run_reference(work, tag, meta, params, adapters, tokens):
    """torch_lora.py (in-process main) on a fixture; returns its output tensors as torch."""
    inp, out = os.path.join(work, f"{tag}.in"), os.path.join(work, f"{tag}.out")
    tg.write_safetensors(inp, fixture_tensors(params, adapters, tokens), meta)
    status = tlo.main([inp, out])
    check(status == 0, f"{tag}: torch_lora.py exits 0")
    raw, _ = tg.read_safetensors(out)
    return {name: tg.to_torch(t) for name, t in raw.items()}


def check_zero_b(work, arch, gen):
    """1. B = 0: logits exactly the base's, dL/dA = 0, dL/dB not; training keeps the base."""
    meta = metadata(arch)
    params = random_base(meta, gen)
    cfg, _, _ = model_parts(meta)
    tokens = torch.randint(0, cfg.vocab_size, (STEPS, BATCH, SEQ + 1), generator=gen,
                           dtype=torch.int32)
    modules = list(tlo.MODULES[arch])
    adapters = random_adapters(meta, params, modules, gen, zero_b=True)
    got = run_reference(work, f"{arch}_zero_b", meta, params, adapters, tokens)
    with torch.no_grad():
        logits, loss = plain_model(meta, params)(tokens[0, :, :SEQ].long(),
                                                 tokens[0, :, 1:].long())
    check(torch.equal(got["expected.lora.logits"], logits),
          f"{arch}: lora_B = 0 gives the base model's logits bit for bit")
    check(torch.equal(got["expected.lora.loss"], loss.reshape(1)), f"{arch}: and its loss")
    grads_a = [got[f"expected.lora.grad.blk.{l}.{m}.lora_A"] for l, m in adapters]
    grads_b = [got[f"expected.lora.grad.blk.{l}.{m}.lora_B"] for l, m in adapters]
    check(all(not g.any() for g in grads_a) and all(g.abs().max() > 0 for g in grads_b),
          f"{arch}: with B = 0 every dL/dA is 0 and every dL/dB is not")
    check(got["expected.lora.losses"][0] == got["expected.lora.loss"][0],
          f"{arch}: losses[0] is the step-0 loss")
    check(got["expected.lora.base_unchanged"].tolist() == [1.0] and
          all(torch.equal(got[n], t) for n, t in params.items()),
          f"{arch}: base_unchanged = 1 and the fixture's base is carried through")
    moved = [got[f"expected.lora.final.blk.{l}.{m}.lora_B"].abs().max() > 0 for l, m in adapters]
    check(all(moved), f"{arch}: {STEPS} AdamW steps move every lora_B off 0")


def check_random_adapters(work, arch, gen):
    """1b and 2: random adapters against the merged model in float64, forward and gradient."""
    meta = metadata(arch)
    params = random_base(meta, gen)
    cfg, _, _ = model_parts(meta)
    tokens = torch.randint(0, cfg.vocab_size, (STEPS, BATCH, SEQ + 1), generator=gen,
                           dtype=torch.int32)
    modules = list(tlo.MODULES[arch])[::2]  # a subset: the adapters present are the targets
    adapters = random_adapters(meta, params, modules, gen)
    got = run_reference(work, f"{arch}_random", meta, params, adapters, tokens)
    x, y = tokens[0, :, :SEQ].long(), tokens[0, :, 1:].long()
    merged = plain_model(meta, merged_params(meta, params, adapters), torch.float64)
    with torch.no_grad():
        want = merged(x, y)[0]
    err = (got["expected.lora.logits"].double() - want).abs().max().item()
    check(err <= 1e-5 * want.abs().max().item(),
          f"{arch}: LoRA logits = logits of W + (alpha/r) B A merged in float64 "
          f"(max error {err:.2e})")
    check(len([n for n in got if n.startswith("expected.lora.grad.")]) == 2 * len(adapters),
          f"{arch}: a gradient for each of the {2 * len(adapters)} adapter tensors only")
    check_gradients(meta, params, adapters, x, y, got)
    check_training(meta, params, adapters, tokens, got)


def check_gradients(meta, params, adapters, x, y, got):
    """2. Autograd through LoRALinear in float64 against central differences of the merged
    model's loss; the f32 fixture's gradients against the float64 ones."""
    arch = meta["arch"]
    model = plain_model(meta, params, torch.float64)
    doubles = {k: (A.double(), B.double()) for k, (A, B) in adapters.items()}
    trainable = tlo.apply_lora(model, arch, doubles, RANK, ALPHA)
    _, loss = model(x, y)
    loss.backward()
    worst = 0.0
    for (layer, module), (A, B) in list(doubles.items())[:2]:
        for half, t in (("A", A), ("B", B)):
            name = f"blk.{layer}.{module}.lora_{half}"
            grad = trainable[name].grad
            for i in (0, t.numel() // 2 + 1):
                fd = finite_difference(meta, params, doubles, (layer, module), half, i, x, y)
                err = abs(fd - grad.view(-1)[i].item()) / max(1e-3, abs(fd))
                worst = max(worst, err)
                if err > 1e-6:
                    raise Failure(f"{arch}: {name}[{i}] autograd {grad.view(-1)[i].item()} vs "
                                  f"finite difference {fd}")
    print(f"ok   {arch}: float64 adapter gradients = central differences of the merged model "
          f"(worst relative error {worst:.1e})")
    worst32 = 0.0
    for name, p in trainable.items():
        g32 = got[f"expected.lora.grad.{name}"].double()
        worst32 = max(worst32, ((g32 - p.grad).abs().max() / p.grad.abs().max()).item())
    check(worst32 <= 1e-4, f"{arch}: torch_lora.py's f32 gradients = the float64 ones "
                           f"(worst {worst32:.1e} of each tensor's largest)")


def finite_difference(meta, params, adapters, key, half, i, x, y, h=1e-6):
    """d loss / d adapters[key][half][i] by central differences, through merged weights."""
    def loss_with(delta):
        moved = dict(adapters)
        A, B = (t.clone() for t in adapters[key])
        (A if half == "A" else B).view(-1)[i] += delta
        moved[key] = (A, B)
        with torch.no_grad():
            model = plain_model(meta, merged_params(meta, params, moved), torch.float64)
            return model(x, y)[1].item()
    return (loss_with(h) - loss_with(-h)) / (2 * h)


def merged_loss(meta, model, params, adapters, x, y):
    """The loss of `model` (float64) with weights W + (alpha/r) B A built differentiably from
    `adapters` {(layer, module): (A, B)}: gradients reach A and B without LoRALinear."""
    weights = merged_params(meta, params, {})
    for (layer, module), (A, B) in adapters.items():
        name = f"blk.{layer}.{tlo.MODULES[meta['arch']][module]}.weight"
        weights[name] = weights[name] + (ALPHA / RANK) * (B @ A)
    return torch.nn.utils.stateless.functional_call(model, weights, (x, y))[1]


def written_out_adamw(meta, params, adapters, tokens, h):
    """AdamW over the adapters only, written out here in float64 from the paper's update
    (decoupled decay, bias-corrected moments) with clipping by the adapters' global norm, on the
    merged-weight model. Returns (losses, {adapter name: final value}, steps clipped)."""
    model = plain_model(meta, params, torch.float64)
    ad = {k: tuple(t.double().clone().requires_grad_(True) for t in pair)
          for k, pair in adapters.items()}
    leaves = [t for pair in ad.values() for t in pair]
    m = [torch.zeros_like(t) for t in leaves]
    v = [torch.zeros_like(t) for t in leaves]
    losses, clipped = [], 0
    for k in range(STEPS):
        batch = tokens[k].long()
        loss = merged_loss(meta, model, params, ad, batch[:, :SEQ], batch[:, 1:])
        grads = torch.autograd.grad(loss, leaves)
        losses.append(loss.item())
        norm = torch.sqrt(sum((g * g).sum() for g in grads)).item()
        coef = min(1.0, h["grad_clip"] / (norm + 1e-6))
        clipped += coef < 1.0
        lr = tg.lr_at(k, h["lr"], h["warmup_steps"], STEPS, h["min_lr_ratio"])
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(leaves, grads)):
                g = g * coef
                p.mul_(1 - lr * h["weight_decay"])
                m[i] = h["beta1"] * m[i] + (1 - h["beta1"]) * g
                v[i] = h["beta2"] * v[i] + (1 - h["beta2"]) * g * g
                m_hat = m[i] / (1 - h["beta1"] ** (k + 1))
                v_hat = v[i] / (1 - h["beta2"] ** (k + 1))
                p.sub_(lr * m_hat / (v_hat.sqrt() + h["eps"]))
    finals = {f"blk.{l}.{mod}.lora_{half}": t.detach() for (l, mod), pair in ad.items()
              for half, t in zip("AB", pair)}
    return losses, finals, clipped


def check_training(meta, params, adapters, tokens, got):
    """torch_lora.py's training, run here in float64 and read from the f32 fixture, against
    the written-out AdamW."""
    h = tlo.parse_numbers(meta, tlo.INT_KEYS, tlo.FLOAT_KEYS)
    arch = meta["arch"]
    losses, finals, clipped = written_out_adamw(meta, params, adapters, tokens, h)
    check(clipped > 0, f"{arch}: the gradient is clipped in {clipped} of {STEPS} steps")
    model = plain_model(meta, params, torch.float64)
    doubles = {k: (A.double(), B.double()) for k, (A, B) in adapters.items()}
    trainable = tlo.apply_lora(model, arch, doubles, RANK, ALPHA)
    ours = tlo.train_adapters(model, trainable, tokens, SEQ, h)
    compare_training(arch, "float64", ours, {n: p.detach() for n, p in trainable.items()},
                     losses, finals, 1e-10)  # equal but for rounding
    # the fixture's float32 answers: float32's rounding, amplified by Adam's steps
    got_finals = {n: got[f"expected.lora.final.{n}"].double() for n in finals}
    compare_training(arch, "float32", got["expected.lora.losses"].tolist(), got_finals, losses,
                     finals, 1e-3)


def compare_training(arch, kind, losses, finals, want_losses, want_finals, tol):
    """Losses relative to the largest, each final adapter relative to its largest element."""
    err = max(abs(a - b) for a, b in zip(losses, want_losses)) / max(map(abs, want_losses))
    worst = max(((finals[n] - t).abs().max() / t.abs().max()).item()
                for n, t in want_finals.items())
    check(len(losses) == STEPS and err <= tol and worst <= tol,
          f"{arch}: torch_lora.py's {STEPS} AdamW steps in {kind} = AdamW written out here in "
          f"float64 (losses {err:.1e}, final adapters {worst:.1e}; limit {tol:g})")


def check_fused_rows(gen):
    """3. Only q_proj targeted: changing B_q changes exactly the q rows of q|k|v."""
    meta = metadata("llama")
    params = random_base(meta, gen)
    cfg, _, _ = model_parts(meta)
    adapters = random_adapters(meta, params, ["self_attn.q_proj"], gen)
    model = plain_model(meta, params)
    trainable = tlo.apply_lora(model, "llama", adapters, RANK, ALPHA)
    blk, seen = model.blk[1], {}
    for attr in ("attn_q", "attn_k", "attn_v"):
        getattr(blk, attr).register_forward_hook(
            lambda mod, inp, out, attr=attr: seen.__setitem__(attr, (inp[0], out.detach())))
    tokens = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=gen)

    def fused():
        with torch.no_grad():
            model(tokens)
        return torch.cat([seen[a][1] for a in ("attn_q", "attn_k", "attn_v")], dim=-1)

    before = fused()
    x = seen["attn_q"][0]
    delta = before[..., :cfg.n_embd] - blk.attn_q.base(x)
    want = (ALPHA / RANK) * (x @ adapters[(1, "self_attn.q_proj")][0].t()) \
        @ adapters[(1, "self_attn.q_proj")][1].t()
    check(torch.allclose(delta, want, rtol=1e-5, atol=1e-6),
          "llama: q_proj's output is W x + (alpha/r) B (A x)")
    with torch.no_grad():
        trainable["blk.1.self_attn.q_proj.lora_B"].add_(0.5)
    after = fused()
    changed = (after != before).reshape(-1, after.shape[-1]).any(dim=0).nonzero().flatten()
    changed = changed.tolist()
    check(changed == list(range(cfg.n_embd)),
          f"llama: changing B_q changes exactly q's {cfg.n_embd} rows of the fused q|k|v "
          f"({before.shape[-1]} rows)")

def expect_status(want, what, call):
    """Runs call() (a tool's main), capturing its output; checks its exit status is `want` and,
    for a failure, that it said why on one line."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = call()
    said = (out.getvalue() + err.getvalue()).strip()
    if status != want or (want != 0 and len(said.splitlines()) != 1):
        raise Failure(f"{what}: exit {status}, wanted {want}; said: {said}")
    print(f"ok   {what}: {said}")


def check_refused_fixtures(work, gen):
    """torch_lora.py refuses, with one line, fixtures whose adapters are missing or wrong."""
    meta = metadata("gpt2")
    params = random_base(meta, gen)
    tokens = torch.zeros(STEPS, BATCH, SEQ + 1, dtype=torch.int32)
    adapters = random_adapters(meta, params, ["attn.c_attn"], gen)
    A, B = adapters[(0, "attn.c_attn")]
    cases = {
        "none": {},
        "half": {"blk.0.attn.c_attn.lora_A": A},
        "rank": {"blk.0.attn.c_attn.lora_A": A[:1], "blk.0.attn.c_attn.lora_B": B[:, :1]},
        "module": {"blk.0.attn.q_proj.lora_A": A, "blk.0.attn.q_proj.lora_B": B},
        "layer": {"blk.2.attn.c_attn.lora_A": A, "blk.2.attn.c_attn.lora_B": B},
    }
    for tag, extra in cases.items():
        inp = os.path.join(work, f"refused_{tag}.in")
        tg.write_safetensors(inp, {**params, "tokens": tokens, **extra}, meta)
        expect_status(1, f"torch_lora.py refuses adapters '{tag}'",
                      lambda: tlo.main([inp, os.path.join(work, "refused.out")]))


def hf_name(arch, name):
    """(Hugging Face name, Conv1D-transposed?) of a Strata parameter name."""
    parts = name.split(".")
    if arch == "gpt2":
        inverse = {v: k for k, v in tec.BLOCK_PARTS.items()}
        if parts[0] == "blk":
            module = inverse[parts[2]]
            return f"h.{parts[1]}.{module}.{parts[3]}", module in tec.CONV1D and \
                parts[3] == "weight"
        return ("ln_f." + parts[1] if parts[0] == "lnf" else name), False
    if parts[0] == "blk":
        inverse = {v: k for k, v in tec.LLAMA_PARTS.items()}
        return f"model.layers.{parts[1]}.{inverse[parts[2]]}.weight", False
    return {v: k for k, v in tec.LLAMA_TOP.items()}[name], False


def hf_config(meta):
    cfg, _, _ = model_parts(meta)
    if meta["arch"] == "gpt2":
        return {"model_type": "gpt2", "activation_function": "gelu_new",
                "tie_word_embeddings": True, "n_inner": None, "layer_norm_epsilon": 1e-5,
                "n_positions": cfg.context_length, "n_ctx": cfg.context_length,
                "vocab_size": cfg.vocab_size, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
                "n_embd": cfg.n_embd}
    return {"model_type": "llama", "hidden_act": "silu", "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.context_length, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "hidden_size": cfg.n_embd,
            "num_key_value_heads": cfg.n_kv_head, "intermediate_size": cfg.ffn_hidden,
            "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
            "tie_word_embeddings": False,
            "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 4}}


def write_hf_dir(path, meta, params, prefix="", shards=1, buffers=None):
    """A Hugging Face model directory of `params` (Strata names), in `shards` files, plus
    `buffers` {HF name: tensor} as some checkpoints store them."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config(meta), f)
    tensors = dict(buffers or {})
    for name, t in params.items():
        hf, transposed = hf_name(meta["arch"], name)
        tensors[prefix + hf] = (t.t() if transposed else t).float().contiguous()
    if shards == 1:
        tg.write_safetensors(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"})
        return
    names, weight_map = list(tensors), {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        tg.write_safetensors(os.path.join(path, shard), part, {"format": "pt"})
        weight_map.update({n: shard for n in part})
    total = sum(t.numel() * 4 for t in tensors.values())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)


def write_adapter_dir(path, arch, targets, adapters, r=RANK, alpha=ALPHA, to_save=None,
                      saved=None):
    """A PEFT adapter directory: adapter_config.json and PEFT's tensor names; `saved` holds
    {HF parameter name: tensor} of modules_to_save."""
    os.makedirs(path, exist_ok=True)
    config = {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": targets,
              "fan_in_fan_out": arch == "gpt2", "modules_to_save": to_save, "lora_dropout": 0.0,
              "bias": "none", "base_model_name_or_path": f"tiny-{arch}"}
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    layers = "transformer.h" if arch == "gpt2" else "model.layers"
    tensors = {f"base_model.model.{n}": t for n, t in (saved or {}).items()}
    for (layer, module), (A, B) in adapters.items():
        stem = f"base_model.model.{layers}.{layer}.{module}"
        tensors[f"{stem}.lora_A.weight"] = A
        tensors[f"{stem}.lora_B.weight"] = B
    tg.write_safetensors(os.path.join(path, "adapter_model.safetensors"), tensors,
                         {"format": "pt"})


PEFT_TARGETS = {"gpt2": (["c_attn", "c_proj"], ["attn.c_attn", "attn.c_proj", "mlp.c_proj"]),
                "llama": (["q_proj", "v_proj", "down_proj"],
                          ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"])}


def off_by_1e3(meta, merged, tokens_path):
    """`merged` with one element of the last adapted output projection off by 1e-3: of row 0,
    the element that moves the float64 logits most (in a model this small, a unit whose
    activation is near 0 can move them by less than the check's tolerance; such an error
    could not be seen by any logit comparison). Returns (params, description)."""
    cfg, _, _ = model_parts(meta)
    last = f"blk.{cfg.n_layer - 1}.{'mlp_proj' if meta['arch'] == 'gpt2' else 'mlp_down'}.weight"
    tokens = tg.to_torch(tg.read_safetensors(tokens_path)[0]["tokens"]).long()
    with torch.no_grad():
        want = plain_model(meta, merged, torch.float64)(tokens)[0]
    best = (-1.0, 0)
    for j in range(merged[last].shape[1]):
        moved = dict(merged)
        moved[last] = merged[last].clone()
        moved[last][0, j] += 1e-3
        with torch.no_grad():
            effect = (plain_model(meta, moved, torch.float64)(tokens)[0] - want).abs().max()
        best = max(best, (effect.item(), j))
    moved = dict(merged)
    moved[last] = merged[last].clone()
    moved[last][0, best[1]] += 1e-3
    return moved, f"{last}[0, {best[1]}], moving the logits by {best[0]:.1e}"


def check_peft(work, arch, gen):
    """4. torch_peft_check.py passes on a true merge and fails on each kind of wrong one.
    GPT-2's base carries `transformer.` (and a mask buffer) and its merge does not; Llama's
    merge is sharded."""
    meta = metadata(arch)
    params = random_base(meta, gen)
    cfg, _, _ = model_parts(meta)
    targets, modules = PEFT_TARGETS[arch]
    adapters = random_adapters(meta, params, modules, gen)
    d = {k: os.path.join(work, f"peft_{arch}_{k}") for k in
         ("base", "adapter", "merged", "off", "alpha", "rank", "zero")}
    if arch == "gpt2":  # save_pretrained's names, with a causal-mask buffer as old files have
        mask = torch.ones(1, 1, cfg.context_length, cfg.context_length).tril()
        write_hf_dir(d["base"], meta, params, prefix="transformer.",
                     buffers={"transformer.h.0.attn.bias": mask})
    else:
        write_hf_dir(d["base"], meta, params)
    write_adapter_dir(d["adapter"], arch, targets, adapters)
    merged = merged_params(meta, params, adapters)
    shards = 2 if arch == "llama" else 1
    write_hf_dir(d["merged"], meta, merged, shards=shards)
    tokens = os.path.join(work, f"peft_{arch}_tokens.safetensors")
    tg.write_safetensors(tokens, {"tokens": torch.randint(0, cfg.vocab_size, (BATCH, SEQ),
                                                          generator=gen, dtype=torch.int32)})
    expect_status(0, f"{arch}: torch_peft_check.py passes on a true merge",
                  lambda: tpc.main([d["base"], d["adapter"], d["merged"], tokens]))

    off, where = off_by_1e3(meta, merged, tokens)
    write_hf_dir(d["off"], meta, off, shards=shards)
    write_adapter_dir(d["alpha"], arch, targets, adapters, alpha=ALPHA * 1.25)
    write_adapter_dir(d["rank"], arch, targets, adapters, r=RANK + 1)
    zero = {k: (A, torch.zeros_like(B)) for k, (A, B) in adapters.items()}
    write_adapter_dir(d["zero"], arch, targets, zero)
    for what, adapter, merge, base in (
            (f"one merged weight off by 1e-3 ({where})", d["adapter"], d["off"], d["base"]),
            ("lora_alpha wrong in adapter_config.json", d["alpha"], d["merged"], d["base"]),
            ("r wrong in adapter_config.json", d["rank"], d["merged"], d["base"]),
            ("an adapter that changes nothing", d["zero"], d["base"], d["base"])):
        expect_status(1, f"{arch}: torch_peft_check.py fails on {what}",
                      lambda: tpc.main([base, adapter, merge, tokens]))
    return d, tokens


def check_modules_to_save(work, gen):
    """A GPT-2 adapter that also trains ln_f in full (PEFT's modules_to_save): its ln_f replaces
    the base's; without ln_f in modules_to_save the tensor is refused."""
    meta = metadata("gpt2")
    params = random_base(meta, gen)
    cfg, _, _ = model_parts(meta)
    adapters = random_adapters(meta, params, ["attn.c_attn"], gen)
    ln_f = params["lnf.weight"] + 0.5 * torch.randn(cfg.n_embd, generator=gen)
    merged = merged_params(meta, {**params, "lnf.weight": ln_f}, adapters)
    d = {k: os.path.join(work, f"saved_{k}") for k in ("base", "adapter", "merged", "undeclared")}
    write_hf_dir(d["base"], meta, params)
    write_hf_dir(d["merged"], meta, merged)
    saved = {"transformer.ln_f.weight": ln_f}
    write_adapter_dir(d["adapter"], "gpt2", ["c_attn"], adapters, to_save=["ln_f"], saved=saved)
    write_adapter_dir(d["undeclared"], "gpt2", ["c_attn"], adapters, saved=saved)
    tokens = os.path.join(work, "saved_tokens.safetensors")
    tg.write_safetensors(tokens, {"tokens": torch.randint(0, cfg.vocab_size, (BATCH, SEQ),
                                                          generator=gen, dtype=torch.int32)})
    expect_status(0, "gpt2: torch_peft_check.py applies modules_to_save ['ln_f']",
                  lambda: tpc.main([d["base"], d["adapter"], d["merged"], tokens]))
    expect_status(1, "gpt2: torch_peft_check.py refuses a full tensor not in modules_to_save",
                  lambda: tpc.main([d["base"], d["undeclared"], d["merged"], tokens]))


def check_cli(work, peft_set):
    """The two tools as commands: exit status and one line on stderr, as a test sees them."""
    bad = subprocess.run([sys.executable, os.path.join(TOOLS, "torch_lora.py"),
                          os.path.join(work, "refused_none.in"), os.path.join(work, "x.out")],
                         capture_output=True, text=True)
    check(bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1,
          f"torch_lora.py as a command: exit 1, one line: {bad.stderr.strip()}")
    d, tokens = peft_set
    good = subprocess.run([sys.executable, os.path.join(TOOLS, "torch_peft_check.py"),
                           d["base"], d["adapter"], d["merged"], tokens],
                          capture_output=True, text=True)
    check(good.returncode == 0, f"torch_peft_check.py as a command: exit 0 "
                                f"({good.stdout.strip()[:60]}...)")


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(39)
    with tempfile.TemporaryDirectory(prefix="torch_lora_selftest.") as work:
        try:
            for arch in ("gpt2", "llama"):
                check_zero_b(work, arch, gen)
                check_random_adapters(work, arch, gen)
            check_fused_rows(gen)
            check_refused_fixtures(work, gen)
            peft_sets = [check_peft(work, arch, gen) for arch in ("gpt2", "llama")]
            check_modules_to_save(work, gen)
            check_cli(work, peft_sets[0])
        except Failure as e:
            print(f"torch_lora_selftest: FAILED: {e}", file=sys.stderr)
            return 1
    print("torch_lora_selftest: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
