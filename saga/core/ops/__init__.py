"""Operations: verify and its invariants, stats, retention, operators."""
