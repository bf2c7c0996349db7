"""hero's git handling: the story's own repository and how its commits reach the user's."""
