"""The YAML configs; the wheel ships this folder as the package ``opteval_configs`` (sweepcore.config.configs_dir)."""
