"""The SQLite engine of records.Database, one concern per module: schema (opening, checks,
migration, transactions), records, claims, choices and notes; records.database composes them."""
