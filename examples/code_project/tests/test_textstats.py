"""What textstats should do: four tests per function."""

from textstats import clamp, is_palindrome, median, slugify, word_count


class TestWordCount:
    def test_simple(self):
        assert word_count("one two three") == 3

    def test_double_spaces(self):
        assert word_count("one  two") == 2

    def test_newlines(self):
        assert word_count("one\ntwo\nthree") == 3

    def test_padded(self):
        assert word_count("  padded  ") == 1


class TestMedian:
    def test_odd(self):
        assert median([3, 1, 2]) == 2

    def test_even(self):
        assert median([4, 1, 3, 2]) == 2.5

    def test_two(self):
        assert median([10, 20]) == 15

    def test_six(self):
        assert median([5, 1, 3, 2, 4, 6]) == 3.5


class TestClamp:
    def test_inside(self):
        assert clamp(5, 0, 10) == 5

    def test_above(self):
        assert clamp(15, 0, 10) == 10

    def test_below(self):
        assert clamp(-3, 0, 10) == 0

    def test_at_edge(self):
        assert clamp(10, 0, 10) == 10


class TestSlugify:
    def test_words(self):
        assert slugify("Hello World") == "hello-world"

    def test_punctuation(self):
        assert slugify("Hello, World!") == "hello-world"

    def test_one_word(self):
        assert slugify("Python") == "python"

    def test_extra_spaces(self):
        assert slugify("  Many   spaces here ") == "many-spaces-here"


class TestPalindrome:
    def test_words(self):
        assert is_palindrome("Step on no pets")

    def test_mixed_case(self):
        assert is_palindrome("RaceCar")

    def test_sentence(self):
        assert is_palindrome("A man, a plan, a canal: Panama")

    def test_not(self):
        assert not is_palindrome("python")
