"""What several test modules share: builders of test data and waits for async tests."""
