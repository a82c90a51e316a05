"""The steps table, the interchange format (DESIGN.md): its rules and column families (:mod:`.table`), and
the dense (rank x step) arrays every detector and view reads (:mod:`.matrix`). Low in the package, so that
the store, the analysis and the dashboards all read it."""
