"""The test suite's shared helpers (builders, the scripted OpenAI server, capability checks); tests import them as
``from helpers.fake_openai import FakeOpenAI``."""
