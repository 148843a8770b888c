"""Data quality: row checks that split valid from quarantined rows, expectation suites, reports."""
