"""What the pages, the report and the tour say about results: tables, labels, comparisons, the report, the tour."""
