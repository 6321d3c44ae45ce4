"""Read side of the store: what a principal may see (`visibility`), and read models built on it."""
