"""The README's standings table: per benchmark, sentence-transformers' loss (the better of CE and
CE + SupCon on labelled data) against this package's, each figure read from eval/results/*.json."""

from __future__ import annotations

from collections.abc import Mapping

from render_values import Results, fmt, link, lookup, mean_of, table

STANDINGS = [  # (what, file, baseline path(s), label(s), ours, label); of several baselines the better is shown
    ("STS-B test Spearman (3 epochs, dev-chosen, 3 seeds)", "pairs_quality",
     "settings.sts.cosent.test.main_score", "CoSENT", "settings.sts.queue_cosent.test.main_score", "`queue_cosent`"),
    ("Answer selection test MRR, pairs only", "pairs_quality",
     "settings.answer_selection.mnrl.test.mrr", "MNRL", "settings.answer_selection.queue_hard.test.mrr", "`queue_infonce` + hard negatives"),
    ("Answer selection test MRR, labelled wrong answers as negatives", "pairs_quality",
     "settings.answer_selection.mnrl_qa_negatives.test.mrr", "MNRL", "settings.answer_selection.queue_qa_negatives.test.mrr", "`queue_infonce`"),
    ("Emotion, full train (3,000-row sample), test acc. (3 seeds)", "acl_quality",
     ("settings.emotion/full.ce.test.accuracy", "settings.emotion/full.supcon.test.accuracy"), ("CE", "CE + SupCon"),
     "settings.emotion/full.acl_embed_encoded.test.accuracy", "ACL-Embed, encoded names"),
    ("Banking77, full train, test acc. (3 seeds)", "acl_quality",
     ("settings.banking77/full.ce.test.accuracy", "settings.banking77/full.supcon.test.accuracy"), ("CE", "CE + SupCon"),
     "settings.banking77/full.acl_embed.test.accuracy", "ACL-Embed"),
    ("SST-2, full train (3,000-row sample), test acc. (3 seeds)", "acl_quality",
     ("settings.sst2/full.ce.test.accuracy", "settings.sst2/full.supcon.test.accuracy"), ("CE", "CE + SupCon"),
     "settings.sst2/full.acl_embed.test.accuracy", "ACL-Embed"),
    ("Banking77, 10 examples per intent, test acc. (5 seeds)", "acl_quality",
     ("settings.banking77/10-shot.ce.test.accuracy", "settings.banking77/10-shot.supcon.test.accuracy"), ("CE", "CE + SupCon"),
     "settings.banking77/10-shot.acl_embed.test.accuracy", "ACL-Embed"),
    ("Emotion, 10 examples per class, test acc. (5 seeds)", "acl_quality",
     ("settings.emotion/10-shot.ce.test.accuracy", "settings.emotion/10-shot.supcon.test.accuracy"), ("CE", "CE + SupCon"),
     "settings.emotion/10-shot.acl_embed_encoded.test.accuracy", "ACL-Embed, encoded names"),
    ("Zero-shot on 20 unseen Banking77 intents, by name", "bench_zero_shot",
     "settings.unseen20.ce_free.test.heldout20", "CE", "settings.unseen20.acl_embed_encoded.test.heldout20", "ACL-Embed, encoded names"),
]


def retrieval_standing(results: Results, labels: Mapping[str, str], setting: str = "scifact") -> list[str] | None:
    """The README row of retrieval_quality.json's ``verdict``: the best sentence-transformers method
    and the best of ours, both chosen on dev, test nDCG@10, ours minus theirs paired by seed (or,
    while seeds are pending, the seed-0 figures said as such). ``labels``: the retrieval table's method names."""
    if not results.has("retrieval_quality") or setting not in results["retrieval_quality"]:
        return None
    block = results["retrieval_quality"][setting]
    verdict, methods = block.get("verdict") or {}, block["methods"]
    theirs, ours = verdict.get("baseline"), verdict.get("ours")
    if theirs is None:
        return None
    name = {"scifact": "SciFact", "nfcorpus": "NFCorpus", "nfcorpus_cpu": "NFCorpus (CPU protocol)"}.get(setting, setting)
    what = f"{name} test nDCG@10 (dev-chosen; untrained {fmt(block['untrained']['test']['ndcg_at_10'])})"

    def cell(name: str) -> str:
        label = labels.get(name, f"`{name}`").removesuffix(" (ST)")
        return f"{label} {fmt(methods[name]['test']['ndcg_at_10'], seeds=True)}"

    if ours is None:
        return [what, cell(theirs), "not run yet", "", link("retrieval_quality", "eval/results")]
    paired = verdict.get("ours_minus_baseline")
    if verdict.get("pending") or paired is None:
        difference = (f"{mean_of(methods[ours]['test']['ndcg_at_10']) - mean_of(methods[theirs]['test']['ndcg_at_10']):+.2f} "
                      "(seeds pending)")
    else:
        difference = f"{paired['mean']:+.2f} ± {paired['std']:.2f}, {paired['seeds_won']} of {len(paired['seeds'])} seeds"
    return [what, cell(theirs), cell(ours), difference, link("retrieval_quality", "eval/results")]


def standings_table(results: Results, retrieval_labels: Mapping[str, str]) -> str:
    """The README's standings: per comparison of STANDINGS the baseline, ours and the difference, then retrieval's verdict."""
    rows = []
    for what, stem, theirs, their_label, ours, our_label in STANDINGS:
        data = results[stem]
        if isinstance(theirs, str):
            theirs, their_label = (theirs,), (their_label,)
        a, their_label = max(((lookup(data, path), label) for path, label in zip(theirs, their_label)), key=lambda x: mean_of(x[0]))
        b = lookup(data, ours)
        rows.append([what, f"{their_label} {fmt(a)}", f"{our_label} {fmt(b)}", f"{mean_of(b) - mean_of(a):+.2f}",
                     link(stem, "eval/results")])
    retrieval = retrieval_standing(results, retrieval_labels)
    if retrieval is not None:
        rows.append(retrieval)
    return table(["measured on", "baseline (sentence-transformers' loss; labelled data: the better of CE and CE + SupCon)",
                  "this package", "difference", "file"], rows)
