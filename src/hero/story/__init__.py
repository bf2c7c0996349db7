"""Stories: markdown files with YAML frontmatter, parsed, validated and written."""
