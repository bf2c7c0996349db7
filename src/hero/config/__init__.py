"""A hero home's configuration: the settings' declaration (``settings``), the records and the
reading of config/ and config.local.yaml (``loader``), `hero init`'s files (``scaffold``) and the
reference pages made from the declaration (``settings_doc``)."""
