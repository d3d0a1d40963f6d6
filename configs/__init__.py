"""The YAML configs; the wheel ships this folder as the package ``opteval_configs`` (cluster.config.configs_dir)."""
