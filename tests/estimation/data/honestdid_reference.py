"""Regenerate honestdid_reference.json: moderndid's HonestDiD numbers on the R HonestDiD package's BCdata example.

Run with a Python that has ``moderndid[didhonest]==0.2.0`` (and ``rdata`` to read the R data once):
    python tests/estimation/data/honestdid_reference.py PATH/TO/BCdata_EventStudy.rda
BCdata_EventStudy.rda is data/ in github.com/asheshrambachan/HonestDiD (Benzarti & Carloni 2019's event study, as
shipped with HonestDiD). The test reads only the JSON, so CI needs neither package.
"""

import json
import sys
from pathlib import Path

import numpy as np
from moderndid.didhonest import (
    compute_identified_set_rm,
    construct_original_cs,
    create_sensitivity_results_rm,
    create_sensitivity_results_sm,
)

OUT = Path(__file__).with_suffix(".json")


def main(rda: str) -> None:
    import rdata

    bc = rdata.read_rda(rda)["BCdata_EventStudy"]
    b, s = np.asarray(bc["betahat"], float), np.asarray(bc["sigma"], float)
    n_pre, n_post = 4, 4
    l_vec = np.array([1.0, 0, 0, 0])
    sd = float(np.sqrt(s[n_pre, n_pre]))
    grid = (-20 * sd, 20 * sd)
    flci = create_sensitivity_results_sm(b, s, n_pre, n_post, m_vec=[0.0, 0.01, 0.02, 0.05])
    rm = create_sensitivity_results_rm(b, s, n_pre, n_post, m_bar_vec=[0.5], grid_lb=grid[0], grid_ub=grid[1])
    rm_cond = create_sensitivity_results_rm(
        b, s, n_pre, n_post, method="Conditional", m_bar_vec=[0.0], grid_lb=grid[0], grid_ub=grid[1]
    )
    orig = construct_original_cs(b, s, n_pre, n_post)
    ids = {str(m): list(map(float, (r.id_lb, r.id_ub))) for m in (0.5, 1.0, 2.0)
           for r in [compute_identified_set_rm(m, b, l_vec, n_pre, n_post)]}  # fmt: skip
    ref = {
        "source": "moderndid 0.2.0 (moderndid.didhonest) on HonestDiD's BCdata_EventStudy",
        "betahat": b.tolist(), "sigma": s.tolist(), "n_pre": n_pre, "n_post": n_post, "theta_grid": list(grid),
        "original": [float(orig.lb), float(orig.ub)],
        "flci": [[float(m), float(lo), float(hi)] for lo, hi, m in flci.select("lb", "ub", "m").iter_rows()],
        "rm_clf": [[float(m), float(lo), float(hi)] for lo, hi, m in rm.select("lb", "ub", "Mbar").iter_rows()],
        "rm_conditional": [
            [float(m), float(lo), float(hi)] for lo, hi, m in rm_cond.select("lb", "ub", "Mbar").iter_rows()
        ],
        "rm_identified_set": ids,
    }  # fmt: skip
    OUT.write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
