"""Re-render the suite findings of docs/findings.md from the shipped panels (nothing retrained).

    python benchmarks/findings_report.py                 # figures into docs/findings/, the report on stdout
    python benchmarks/findings_report.py --out /tmp/r.md --figures /tmp/fig

`memtui demo --suite DIR` trains the four models, extracts their panels and writes DIR/report.md in one go; the four
panels ship as sample_panels/suite-neox-*.h5. When the report's code or the estimator changes, this re-runs only the
report (`memtui.demo.findings.analyse`, `figures`, `render`) on those panels with the current code, so docs/findings.md
can be brought up to date without retraining. The printed Markdown replaces docs/findings.md from its title down to
"## Under the calibrated band"; keep the paragraph after the first one, which says how and when the panels were made
(the timings are the original run's, which a re-render cannot measure).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def suite_panels(folder: Path = ROOT / "sample_panels") -> list[Path]:
    """The shipped suite's panels, smallest model first (the order `memtui --sample suite` opens them in)."""
    found = list(folder.glob("suite-neox-*k.h5"))
    return sorted(found, key=lambda p: int(re.search(r"-(\d+)k\.h5$", p.name).group(1)))


def main(argv: list[str] | None = None) -> int:
    from memtui.demo.findings import analyse, figures, render

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", type=Path, default=ROOT / "docs" / "findings", help="folder for the SVG figures")
    ap.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    ap.add_argument("--draws", type=int, default=1000)
    args = ap.parse_args(argv)
    panels = suite_panels()
    if len(panels) != 4:
        print(f"expected the 4 shipped suite panels in sample_panels/, found {len(panels)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    f = analyse(panels, draws=args.draws)
    args.figures.mkdir(parents=True, exist_ok=True)
    figures(f, args.figures)
    text = render(f, figures_dir="findings", command="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    print(f"re-rendered in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
