-- Task labels (issue 37): "\n" + the task's sorted "key=value" lines, each
-- followed by "\n"; "" for a task without labels. A list by label keeps
-- the rows whose labels hold "\nkey=value\n" (keys and values never hold a
-- newline or "="), within the namespace and create-time range the other
-- indexes narrow it to.
ALTER TABLE archived_tasks ADD COLUMN labels text COLLATE "C" NOT NULL DEFAULT '';
