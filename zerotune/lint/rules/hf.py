"""placeholder"""

RULES = ()
