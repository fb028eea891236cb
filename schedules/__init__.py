"""Package schedules: see DESIGN.md; filled in by later milestones."""
