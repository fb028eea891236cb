"""Package search: see DESIGN.md; filled in by later milestones."""
