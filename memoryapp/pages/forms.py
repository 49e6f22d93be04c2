"""The one fact form, for every page that adds or edits a fact (end users and org admins)."""

from django import forms

from memoryapp import validation
from memoryapp.backends.phrasing import stored_voice
from memoryapp.pages.display import why_in_words
from memoryapp.vocabulary import FACT_MAX_CHARS, KIND_CHOICES, PERSONAL_KIND_CHOICES


class FactForm(forms.Form):
    """Text and kind. Length and markup are checked here with a clear message; text is never cut."""

    text = forms.CharField(
        label="Fact, as one sentence",
        # No maxlength on the field: a browser would silently cut a pasted paragraph mid-word.
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=f"One sentence, up to {FACT_MAX_CHARS} characters.",
        error_messages={"required": "Write the fact as one sentence."},
    )
    # No default kind: the person chooses, the form never guesses "preference".
    kind = forms.ChoiceField(
        label="Kind",
        choices=KIND_CHOICES,
        error_messages={"required": "Choose a kind from the list.", "invalid_choice": "Choose a kind from the list."},
    )

    def __init__(self, *args, text_label=None, personal=False, **kwargs):
        super().__init__(*args, **kwargs)
        # A person's own fact is written to them in the second person and stored in the third.
        self.personal = personal
        if personal:
            self.fields["kind"].choices = PERSONAL_KIND_CHOICES
        if text_label:
            self.fields["text"].label = text_label

    def clean_text(self):
        text = validation.normalise(self.cleaned_data["text"])
        if len(text) > FACT_MAX_CHARS:
            raise forms.ValidationError(
                f"This is {len(text)} characters; a fact can have at most {FACT_MAX_CHARS}. "
                "Shorten it to one sentence. Nothing was saved."
            )
        if "<" in text or ">" in text:
            raise forms.ValidationError("A fact is plain text: remove the < and > characters. Nothing was saved.")
        text = stored_voice(text) if self.personal else text
        # The frozen checks (shape, markup, disguise, secrets) need no model: said with any other error of
        # the form at once, in the words every fact form uses.
        refused = validation.refusal(text, "profile")
        if refused:
            raise forms.ValidationError(f"This can't be saved: {why_in_words(refused)}. Nothing was saved.")
        return text
