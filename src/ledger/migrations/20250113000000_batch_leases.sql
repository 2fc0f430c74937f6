-- A replica renews its claims on the lines it runs every few seconds (`batch::lease`): the
-- running lines, by holder, so a heartbeat reads only its own.
CREATE INDEX batch_lines_running ON batch_lines (claimed_by) WHERE state = 'running';
