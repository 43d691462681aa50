"""`tether warm`: one reward model from the weight average of several (WARM, Ramé et al. 2024)."""

from __future__ import annotations

from pathlib import Path

DESCRIPTION = (
    "Average reward models fine-tuned from one initialisation (several `tether rm` runs from the same SFT model, "
    "with different seeds or data orders) in weight space into one reward model, usable wherever a reward model "
    "is (reward.models, --reward-model, `tether serve`). Members of another shape, tokenizer or starting point "
    "are refused. With --eval PAIRS each member and the average are scored on held-out preference pairs "
    "(accuracy; agreement with gold scores when the rows carry gold_chosen and gold_rejected), beside the "
    "ensembles reward.combine makes of the members (mean, min, mean_minus_std with k = 1), and the average's "
    "score offset is set so held-out responses score 0 on average, as `tether rm` sets its own; without, the "
    "offset is the members' mean. Writes OUT (a reward model directory) and OUT/warm.json."
)


def register(sub) -> None:
    p = sub.add_parser("warm", help="Average reward models in weight space (WARM) into one.", description=DESCRIPTION)
    p.add_argument("--models", required=True, help="Comma-separated reward model directories (at least two).")
    p.add_argument("--out", required=True, help="Directory of the averaged reward model.")
    p.add_argument("--eval", default=None, metavar="PAIRS",
                   help="Held-out preference pairs (prompt, chosen, rejected) to score the members and the average on.")
    p.add_argument("--batch-size", type=int, default=64, help="Pairs scored at once with --eval (default 64).")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's).")


def run(args) -> int:
    import json

    from tether.common.errors import ConfigError
    from tether.common.outputs import check_output_dir
    from tether.models.averaging import check_members

    members = [Path(m.strip()) for m in args.models.split(",") if m.strip()]
    check_output_dir(args.out, "--out")
    if Path(args.out).resolve() in {m.resolve() for m in members}:
        raise ConfigError("--out is one of --models; write the average elsewhere.")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {args.batch_size}.")
    check_members(members)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from tether.models import load_tokenizer

    tokenizer = load_tokenizer(str(members[0]), key="--models")
    held = held_out_pairs(args.eval, tokenizer, members[0]) if args.eval else None
    model, offsets, member_scores = averaged(members, tokenizer, held, args.batch_size)
    report = {"members": [str(m) for m in members], "member_offsets": offsets}
    if held is not None:
        report["eval"] = evaluate(members, model, tokenizer, held, member_scores, offsets, args.batch_size)
        offset = report["eval"]["average"]["score_mean"]
    else:
        offset = sum(offsets) / len(offsets)
    model.config.score_offset = offset
    model.config.warm_members = report["members"]
    report["score_offset"] = offset
    save(Path(args.out), model, tokenizer, report)
    print(table(report))
    print(json.dumps(report, indent=2))
    return 0


def held_out_pairs(path: str, tokenizer, first: Path) -> tuple[list, list[float] | None]:
    """(the tokenized held-out pairs that fit the members' context, their gold margins chosen −
    rejected where every row carries gold scores, else None)."""
    from tether.data import load_records, preference_examples, tokenize_preference
    from tether.data.records import gold_margins
    from tether.models.loading import load_model_config

    records = load_records(path, key="--eval")
    examples, _ = preference_examples(records, "skip")
    context = getattr(load_model_config(str(first), "--models"), "max_position_embeddings", None) or 1 << 30
    kept = [(ex, tokenize_preference(ex, tokenizer, context, "auto", "truncate")) for ex in examples]
    kept = [(ex, t) for ex, t in kept if t is not None]
    margins = gold_margins(records)
    return [t for _, t in kept], None if margins is None else [margins[ex.source, ex.row] for ex, _ in kept]


def averaged(members: list[Path], tokenizer, held, batch_size: int):
    """(a model carrying the mean of every member's weights, each member's score offset, each
    member's raw (chosen, rejected) scores on ``held``'s pairs, or [] without); each member is
    loaded once, scored while loaded, and the last one's model object takes the average."""
    from tether.models import load_scalar_model
    from tether.models.averaging import average_state_dicts

    offsets, scores, last = [], [], []

    def states():
        for m in members:
            model = load_scalar_model(str(m), tokenizer, key="--models").eval()
            offsets.append(float(getattr(model.config, "score_offset", 0.0) or 0.0))
            if held is not None:
                scores.append(pair_scores_all(model, held[0], tokenizer.pad_token_id, batch_size))
            last[:] = [model]
            yield model.state_dict()

    mean = average_state_dicts(states(), [str(m) for m in members])
    model = last[0]
    model.load_state_dict(mean)
    return model, offsets, scores


def evaluate(members: list[Path], model, tokenizer, held, member_scores: list, offsets: list[float],
             batch_size: int) -> dict:
    """Each member's and the average's held-out accuracy, mean margin and mean raw score (and
    agreement with gold where every row carries gold scores), beside the ensembles of the members."""
    import torch

    from tether.algos.judge_format import gold_agreement
    from tether.roles.reward import combine_scores

    pairs, margins = held

    def entry(c, r) -> dict:
        e = {"accuracy": float((c > r).float().mean()), "margin": float((c - r).mean()),
             "score_mean": float(((c + r) / 2).mean()), "pairs": len(pairs)}
        if margins is not None:
            e["gold_agreement"], e["gold_pairs"] = gold_agreement([float(x) for x in (c > r)], margins)
        return e

    out = {str(m): entry(c, r) for m, (c, r) in zip(members, member_scores)}
    out["average"] = entry(*pair_scores_all(model, pairs, tokenizer.pad_token_id, batch_size))
    # The ensembles reward.combine would make of the members, each member's offset subtracted as the reward role does.
    chosen = torch.stack([c - o for (c, _), o in zip(member_scores, offsets)])
    rejected = torch.stack([r - o for (_, r), o in zip(member_scores, offsets)])
    for how in ("mean", "min", "mean_minus_std"):
        out[f"ensemble {how}"] = entry(combine_scores(chosen, how), combine_scores(rejected, how))
    return out


def pair_scores_all(model, pairs, pad_id: int, batch_size: int):
    """(chosen, rejected) raw scores (N,), (N,) of tokenized pairs, ``batch_size`` pairs a forward."""
    import torch

    from tether.data import collate_right
    from tether.models.forward import last_token_scores

    chosen, rejected = [], []
    with torch.no_grad():
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start:start + batch_size]
            seqs = [p.prompt_ids + p.chosen_ids for p in chunk] + [p.prompt_ids + p.rejected_ids for p in chunk]
            batch = collate_right(seqs, pad_id)
            scores = last_token_scores(model, batch["input_ids"], batch["attention_mask"]).float().cpu()
            chosen.append(scores[:len(chunk)])
            rejected.append(scores[len(chunk):])
    return torch.cat(chosen), torch.cat(rejected)


def save(out: Path, model, tokenizer, report: dict) -> None:
    from tether.loops.common import save_final
    from tether.runs import write_json

    card = ("# A weight-averaged reward model (WARM)\n\nThe element-wise mean of the weights of "
            f"{len(report['members'])} reward models fine-tuned from one initialisation (Ramé et al. 2024): "
            + ", ".join(f"`{m}`" for m in report["members"]) + f". Score offset {report['score_offset']:.6g} "
            "(subtracted from every score). Written by `tether warm`; numbers in warm.json.\n")
    out.mkdir(parents=True, exist_ok=True)
    save_final(out, model, tokenizer, card=card)
    write_json(out / "warm.json", report)


def table(report: dict) -> str:
    lines = [f"tether warm: {len(report['members'])} reward models averaged; score offset "
             f"{report['score_offset']:.4f}"]
    for name, e in report.get("eval", {}).items():
        gold = f", gold agreement {e['gold_agreement']:.3f}" if e.get("gold_agreement") is not None else ""
        lines.append(f"  {name}: accuracy {e['accuracy']:.3f}, margin {e['margin']:+.3f}{gold} ({e['pairs']} pairs)")
    return "\n".join(lines)
