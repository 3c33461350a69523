"""Small text and number helpers: the module examples/code_evolution.py evolves.

It ships with five bugs; its tests (tests/test_textstats.py) say what each function
should do.
"""


def word_count(text):
    """The number of words in ``text`` (runs of white space separate words)."""
    return len(text.split(" "))


def median(values):
    """The median of a non-empty list of numbers."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]


def clamp(x, low, high):
    """``x`` limited to the range [low, high]."""
    return max(low, min(x, low))


def slugify(title):
    """A URL slug: lower case, words joined by hyphens, punctuation dropped."""
    return title.lower().replace(" ", "_")


def is_palindrome(text):
    """Does ``text`` read the same backwards, ignoring case, spaces and punctuation?"""
    letters = [c for c in text if c.isalnum()]
    return letters == letters[::-1]
