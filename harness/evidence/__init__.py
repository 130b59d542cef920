"""Evidence: drill records, the seal and its verification, the report, exports, compare and history."""
