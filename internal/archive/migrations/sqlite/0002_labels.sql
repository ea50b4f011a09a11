-- Task labels (issue 37): "\n" + the task's sorted "key=value" lines, each
-- followed by "\n"; "" for a task without labels. A list by label keeps
-- the rows whose labels hold "\nkey=value\n".
ALTER TABLE archived_tasks ADD COLUMN labels TEXT NOT NULL DEFAULT '';
