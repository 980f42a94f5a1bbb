"""A demo runs folder for `evalx view`, and the screenshots of its pages in docs/ (docs/viewer-*.png).

    python bench/viewer_demo.py [--out DIR] [--no-shots]

Writes a small support-bot project (two Python targets whose answers change
from round to round), makes six real `evalx run`s of it (one a round: pass
rates mostly rise while one case regresses), sets a review mark on the last
run, then serves the folder with the viewer on 127.0.0.1 and takes one PNG
per page with headless Chromium (Playwright): docs/viewer-runs.png,
viewer-case.png, viewer-compare.png, viewer-run.png. `--out DIR` keeps the
project there (then `evalx view DIR/runs` to look around).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from evalx.results.reviews import add_mark

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from viewer import serve_in_thread  # noqa: E402  (bench/viewer.py: the app in a thread)

BOT = """
import pathlib
import random

ANSWERS = {
    "refund-window": "You can return an item within 30 days for a full refund.",
    "refund-damaged": "A damaged item is refunded in full, shipping included.",
    "track-order": "Track your order from the Orders page with its tracking number.",
    "change-address": "You can change the shipping address until the order ships.",
    "cancel-order": "Cancel from the Orders page before the order ships.",
    "invoice": "Invoices are under Account > Billing, as PDF.",
    "password-reset": "Use 'Forgot password' on the sign-in page to reset it.",
    "international": "We ship to 40 countries; duties are paid on delivery.",
    "gift-card": "Gift cards never expire and cannot be refunded.",
    "warranty": "Electronics have a two-year warranty from the delivery date.",
    "loyalty": "Loyalty points are worth one cent each at checkout.",
    "escalate": "I am passing you to a human agent now.",
}
# which round each target first gets a case right (the answers improve over time)
LEARNED = {
    "small": {"refund-window": 0, "track-order": 0, "invoice": 1, "password-reset": 2, "cancel-order": 3,
              "change-address": 4, "gift-card": 5, "warranty": 9, "loyalty": 9, "international": 3,
              "refund-damaged": 4, "escalate": 0},
    "large": {"refund-window": 0, "track-order": 0, "invoice": 0, "password-reset": 0, "cancel-order": 1,
              "change-address": 2, "gift-card": 2, "warranty": 3, "loyalty": 4, "international": 1,
              "refund-damaged": 2, "escalate": 0},
}


def _answer(model, case):
    round_ = int(pathlib.Path(__file__).with_name("round.txt").read_text())
    rng = random.Random(f"{model}{case['id']}{round_}")
    if case["id"] == "escalate" and round_ >= 4:  # a prompt change in round 4 stopped the hand-off
        return {"text": "Let me try to help you with that myself.", "cost_usd": 0.0004 if model == "small" else 0.003}
    good = round_ >= LEARNED[model][case["id"]]
    text = ANSWERS[case["id"]] if good else "I am not sure; please check our help pages."
    cost = (0.0004 if model == "small" else 0.003) * rng.uniform(0.8, 1.3)
    return {"text": text, "cost_usd": round(cost, 6)}


def small(question, case):
    return _answer("small", case)


def large(question, case):
    return _answer("large", case)
"""

CASES = {
    "refund-window": ("How long do I have to return something?", "30 days"),
    "refund-damaged": ("My parcel arrived broken, what now?", "refunded in full"),
    "track-order": ("Where is my order?", "tracking number"),
    "change-address": ("Can I change where it ships?", "until the order ships"),
    "cancel-order": ("How do I cancel?", "before the order ships"),
    "invoice": ("I need an invoice for my company", "Billing"),
    "password-reset": ("I forgot my password", "Forgot password"),
    "international": ("Do you ship to Canada?", "40 countries"),
    "gift-card": ("Do gift cards expire?", "never expire"),
    "warranty": ("Is my laptop under warranty?", "two-year"),
    "loyalty": ("What are my points worth?", "one cent"),
    "escalate": ("I want to talk to a person", "human agent"),
}


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bot.py").write_text(BOT)
    (folder / "round.txt").write_text("0")
    cases = "\n".join(
        f"      - {{id: {cid}, category: {('refunds' if 'refund' in cid else 'orders' if 'order' in cid else 'account')}, "
        f"input: {q!r}, assert: [{{type: contains, value: {v!r}}}]}}"
        for cid, (q, v) in CASES.items()
    )
    config = folder / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: support-bot\n"
        "targets:\n  - {id: small, type: python, callable: bot.py:small}\n  - {id: large, type: python, callable: bot.py:large}\n"
        "gates:\n  min_pass_rate: 0.6\n"
        f"datasets:\n  - id: support\n    cases:\n{cases}\n"
    )
    return config


def make_runs(config: Path, rounds: int = 6) -> list[Path]:
    runs: list[Path] = []
    for r in range(rounds):
        (config.parent / "round.txt").write_text(str(r))
        before = set((config.parent / "runs").iterdir()) if (config.parent / "runs").is_dir() else set()
        extra = ["--baseline", str(runs[-1])] if runs else []
        subprocess.run([sys.executable, "-m", "evalx.cli", "run", "-q", *extra], cwd=config.parent, capture_output=True, check=False)
        (new,) = set((config.parent / "runs").iterdir()) - before
        runs.append(new)
    return runs


def screenshots(base: str, runs: list[Path], docs: Path) -> list[Path]:
    from browser import launch  # tests/browser.py
    from playwright.sync_api import sync_playwright

    shots = [
        ("viewer-runs.png", "/"),
        ("viewer-case.png", "/case?target=small&dataset=support&case=escalate"),
        ("viewer-compare.png", f"/compare?a={runs[-3].name}&b={runs[-2].name}"),
        ("viewer-run.png", f"/run/{runs[-1].name}"),
    ]
    written = []
    with sync_playwright() as p:
        b = launch(p)
        page = b.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        for name, url in shots:
            page.goto(base + url, wait_until="load")
            page.screenshot(path=str(docs / name), full_page=False)
            written.append(docs / name)
        b.close()
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="Keep the demo project here.")
    ap.add_argument("--no-shots", action="store_true", help="Only build the runs folder.")
    args = ap.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="evalx-viewer-demo-"))
    config = write_project(folder)
    runs = make_runs(config)
    add_mark(
        runs[-1],
        target="small",
        dataset="support",
        case_id="escalate",
        verdict="fail",
        comment="must hand off to a human when asked",
        reviewer="ana",
    )
    add_mark(runs[-1], target="small", dataset="support", case_id="loyalty", verdict="pass", comment="right in other words", reviewer="ana")
    print(f"demo runs in {folder / 'runs'}")
    if args.no_shots:
        return
    base, stop = serve_in_thread(folder / "runs", reviewer="ana")
    try:
        for path in screenshots(base, runs, ROOT / "docs"):
            print(f"wrote {path.relative_to(ROOT)}")
    finally:
        stop()


if __name__ == "__main__":
    main()
