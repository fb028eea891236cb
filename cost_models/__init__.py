"""Package cost_models: see DESIGN.md; filled in by later milestones."""
