"""The config: load ``evalconfig.yaml``, interpolate ``${VAR}``, validate it against the schema, expand ``matrix:``.

Owns everything between a config file and a validated :class:`Config`; nothing here runs a target.
"""
