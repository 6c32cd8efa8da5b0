"""Security: each finding of the production-mode review, tried as an attacker would."""
