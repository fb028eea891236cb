"""Package records: see DESIGN.md; filled in by later milestones."""
