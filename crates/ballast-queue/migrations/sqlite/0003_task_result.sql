-- What a task's successful attempt reported (TaskContext::set_result), as JSON
-- text: a deferred HTTP write's upstream status, for GET /tasks/{id}.
ALTER TABLE ballast_tasks ADD COLUMN result TEXT;
